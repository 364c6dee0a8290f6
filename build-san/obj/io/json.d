build-san/obj/io/json.o: src/io/json.c src/io/json.h src/base/common.h
src/io/json.h:
src/base/common.h:
