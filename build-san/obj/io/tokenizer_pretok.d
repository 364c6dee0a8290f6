build-san/obj/io/tokenizer_pretok.o: src/io/tokenizer_pretok.c \
 src/io/tokenizer_internal.h src/io/tokenizer.h src/base/common.h
src/io/tokenizer_internal.h:
src/io/tokenizer.h:
src/base/common.h:
