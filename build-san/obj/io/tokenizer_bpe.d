build-san/obj/io/tokenizer_bpe.o: src/io/tokenizer_bpe.c \
 src/io/tokenizer_internal.h src/io/tokenizer.h src/base/common.h
src/io/tokenizer_internal.h:
src/io/tokenizer.h:
src/base/common.h:
