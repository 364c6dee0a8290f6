build-san/obj/comm/comm_select.o: src/comm/comm_select.c src/comm/comm.h \
 src/base/common.h src/base/dtype.h src/comm/launch.h src/base/env.h \
 src/comm/comm_mpi.h src/comm/mesh.h src/comm/comm_staged.h \
 src/compute/backend.h src/base/checked.h src/comm/nccl_api.h
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/base/env.h:
src/comm/comm_mpi.h:
src/comm/mesh.h:
src/comm/comm_staged.h:
src/compute/backend.h:
src/base/checked.h:
src/comm/nccl_api.h:
