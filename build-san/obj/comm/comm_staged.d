build-san/obj/comm/comm_staged.o: src/comm/comm_staged.c \
 src/comm/comm_staged.h src/compute/backend.h src/base/checked.h \
 src/base/common.h src/base/dtype.h src/comm/comm.h src/comm/launch.h \
 src/comm/comm_backend.h
src/comm/comm_staged.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
src/comm/comm.h:
src/comm/launch.h:
src/comm/comm_backend.h:
