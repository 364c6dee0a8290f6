build-san/obj/app/commtest_async.o: src/app/commtest_async.c \
 src/app/commtest_internal.h src/comm/comm.h src/base/common.h \
 src/base/dtype.h src/comm/launch.h src/comm/mesh.h src/compute/backend.h \
 src/base/checked.h src/base/bf16.h
src/app/commtest_internal.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/comm/mesh.h:
src/compute/backend.h:
src/base/checked.h:
src/base/bf16.h:
