build-san/obj/app/train.o: src/app/train.c src/app/train.h \
 src/base/common.h src/config/config.h src/base/dtype.h src/comm/comm.h \
 src/comm/launch.h src/compute/backend.h src/base/checked.h \
 src/model/model.h src/compute/mempool.h src/model/model_config.h \
 src/model/params.h src/parallel/optim.h src/parallel/zero.h \
 src/parallel/sched.h src/app/trainer_internal.h src/comm/mesh.h \
 src/io/checkpoint.h src/io/data.h src/io/metrics.h src/io/tensorboard.h \
 src/io/rundir.h src/parallel/executor.h src/base/stop.h src/io/llmc.h \
 src/plan/plan.h
src/app/train.h:
src/base/common.h:
src/config/config.h:
src/base/dtype.h:
src/comm/comm.h:
src/comm/launch.h:
src/compute/backend.h:
src/base/checked.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/app/trainer_internal.h:
src/comm/mesh.h:
src/io/checkpoint.h:
src/io/data.h:
src/io/metrics.h:
src/io/tensorboard.h:
src/io/rundir.h:
src/parallel/executor.h:
src/base/stop.h:
src/io/llmc.h:
src/plan/plan.h:
