build-san/obj/io/checkpoint.o: src/io/checkpoint.c \
 src/io/checkpoint_internal.h src/io/checkpoint.h src/compute/backend.h \
 src/base/checked.h src/base/common.h src/base/dtype.h src/comm/comm.h \
 src/comm/launch.h src/config/config.h src/model/model.h \
 src/compute/mempool.h src/model/model_config.h src/model/params.h \
 src/parallel/optim.h src/parallel/zero.h src/parallel/sched.h \
 src/base/crc32c.h src/base/env.h
src/io/checkpoint_internal.h:
src/io/checkpoint.h:
src/compute/backend.h:
src/base/checked.h:
src/base/common.h:
src/base/dtype.h:
src/comm/comm.h:
src/comm/launch.h:
src/config/config.h:
src/model/model.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
src/base/crc32c.h:
src/base/env.h:
