build-san/obj/compute/mempool.o: src/compute/mempool.c \
 src/compute/mempool.h src/compute/backend.h src/base/checked.h \
 src/base/common.h src/base/dtype.h
src/compute/mempool.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
