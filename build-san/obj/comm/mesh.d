build-san/obj/comm/mesh.o: src/comm/mesh.c src/comm/mesh.h \
 src/base/common.h src/comm/comm.h src/base/dtype.h src/comm/launch.h
src/comm/mesh.h:
src/base/common.h:
src/comm/comm.h:
src/base/dtype.h:
src/comm/launch.h:
