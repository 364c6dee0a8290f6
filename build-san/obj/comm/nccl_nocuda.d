build-san/obj/comm/nccl_nocuda.o: src/comm/nccl_nocuda.c \
 src/comm/nccl_api.h src/comm/comm.h src/base/common.h src/base/dtype.h \
 src/comm/launch.h src/comm/mesh.h
src/comm/nccl_api.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/comm/mesh.h:
