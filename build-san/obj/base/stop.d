build-san/obj/base/stop.o: src/base/stop.c src/base/stop.h \
 src/base/common.h src/base/env.h
src/base/stop.h:
src/base/common.h:
src/base/env.h:
