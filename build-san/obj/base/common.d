build-san/obj/base/common.o: src/base/common.c src/base/common.h \
 src/base/checked.h src/base/env.h
src/base/common.h:
src/base/checked.h:
src/base/env.h:
