build-san/obj/io/data.o: src/io/data.c src/io/data.h src/base/common.h
src/io/data.h:
src/base/common.h:
