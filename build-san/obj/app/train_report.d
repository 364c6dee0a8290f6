build-san/obj/app/train_report.o: src/app/train_report.c \
 src/app/trainer_internal.h src/comm/launch.h src/base/common.h \
 src/comm/mesh.h src/comm/comm.h src/base/dtype.h src/compute/backend.h \
 src/base/checked.h src/compute/mempool.h src/config/config.h \
 src/model/model.h src/model/model_config.h src/model/params.h \
 src/parallel/optim.h src/parallel/zero.h src/parallel/sched.h \
 src/io/checkpoint.h src/io/data.h src/io/metrics.h src/io/tensorboard.h \
 src/io/rundir.h src/parallel/executor.h
src/app/trainer_internal.h:
src/comm/launch.h:
src/base/common.h:
src/comm/mesh.h:
src/comm/comm.h:
src/base/dtype.h:
src/compute/backend.h:
src/base/checked.h:
src/compute/mempool.h:
src/config/config.h:
src/model/model.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/io/checkpoint.h:
src/io/data.h:
src/io/metrics.h:
src/io/tensorboard.h:
src/io/rundir.h:
src/parallel/executor.h:
