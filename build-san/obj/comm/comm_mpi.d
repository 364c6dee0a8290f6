build-san/obj/comm/comm_mpi.o: src/comm/comm_mpi.c src/comm/comm_mpi.h \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/comm/mesh.h /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 src/base/bf16.h src/base/stop.h src/comm/comm_backend.h
src/comm/comm_mpi.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/comm/mesh.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
src/base/bf16.h:
src/base/stop.h:
src/comm/comm_backend.h:
