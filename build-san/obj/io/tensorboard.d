build-san/obj/io/tensorboard.o: src/io/tensorboard.c src/io/tensorboard.h \
 src/base/common.h src/io/metrics.h src/comm/comm.h src/base/dtype.h \
 src/comm/launch.h src/config/config.h src/compute/backend.h \
 src/base/checked.h src/model/model.h src/compute/mempool.h \
 src/model/model_config.h src/model/params.h src/parallel/optim.h \
 src/parallel/zero.h src/parallel/sched.h src/base/crc32c.h
src/io/tensorboard.h:
src/base/common.h:
src/io/metrics.h:
src/comm/comm.h:
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
src/base/crc32c.h:
