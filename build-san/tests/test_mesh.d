build-san/tests/test_mesh: tests/test_mesh.c src/comm/mesh.h \
 src/base/common.h src/comm/comm.h src/base/dtype.h src/comm/launch.h \
 tests/testlib.h
src/comm/mesh.h:
src/base/common.h:
src/comm/comm.h:
src/base/dtype.h:
src/comm/launch.h:
tests/testlib.h:
