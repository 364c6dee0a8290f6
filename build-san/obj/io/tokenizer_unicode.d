build-san/obj/io/tokenizer_unicode.o: src/io/tokenizer_unicode.c \
 src/io/tokenizer_internal.h src/io/tokenizer.h src/base/common.h
src/io/tokenizer_internal.h:
src/io/tokenizer.h:
src/base/common.h:
