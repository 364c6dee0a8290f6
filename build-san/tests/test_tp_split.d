build-san/tests/test_tp_split: tests/test_tp_split.c \
 src/compute/backend.h src/base/common.h src/base/dtype.h \
 src/config/config.h src/comm/comm.h src/comm/launch.h src/model/model.h \
 src/compute/mempool.h src/model/model_config.h src/model/params.h \
 src/parallel/optim.h src/parallel/zero.h src/parallel/sched.h \
 tests/testlib.h
src/compute/backend.h:
src/base/common.h:
src/base/dtype.h:
src/config/config.h:
src/comm/comm.h:
src/comm/launch.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
tests/testlib.h:
