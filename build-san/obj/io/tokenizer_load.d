build-san/obj/io/tokenizer_load.o: src/io/tokenizer_load.c \
 src/io/tokenizer_internal.h src/io/tokenizer.h src/base/common.h \
 src/io/json.h
src/io/tokenizer_internal.h:
src/io/tokenizer.h:
src/base/common.h:
src/io/json.h:
