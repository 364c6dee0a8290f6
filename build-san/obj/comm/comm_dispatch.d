build-san/obj/comm/comm_dispatch.o: src/comm/comm_dispatch.c \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/comm/comm_backend.h
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/comm/comm_backend.h:
