build-san/obj/io/rundir.o: src/io/rundir.c src/io/rundir.h \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/config/config.h src/compute/backend.h src/base/checked.h \
 src/model/model.h src/compute/mempool.h src/model/model_config.h \
 src/model/params.h src/parallel/optim.h src/parallel/zero.h \
 src/parallel/sched.h src/base/env.h
src/io/rundir.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/config/config.h:
src/compute/backend.h:
src/base/checked.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/base/env.h:
