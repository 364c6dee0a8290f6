build-san/obj/base/env.o: src/base/env.c src/base/env.h
src/base/env.h:
