build-san/obj/compute/backend.o: src/compute/backend.c \
 src/compute/backend.h src/base/checked.h src/base/common.h \
 src/base/dtype.h
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
