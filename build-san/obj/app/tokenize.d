build-san/obj/app/tokenize.o: src/app/tokenize.c src/app/tokenize.h \
 src/base/common.h src/io/data.h src/io/json.h src/io/tokenizer.h
src/app/tokenize.h:
src/base/common.h:
src/io/data.h:
src/io/json.h:
src/io/tokenizer.h:
