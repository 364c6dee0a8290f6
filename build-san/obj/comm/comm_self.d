build-san/obj/comm/comm_self.o: src/comm/comm_self.c \
 src/comm/comm_backend.h src/comm/comm.h src/base/common.h \
 src/base/dtype.h src/comm/launch.h src/compute/backend.h \
 src/base/checked.h
src/comm/comm_backend.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/compute/backend.h:
src/base/checked.h:
