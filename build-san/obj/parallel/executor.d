build-san/obj/parallel/executor.o: src/parallel/executor.c \
 src/parallel/executor.h src/comm/comm.h src/base/common.h \
 src/base/dtype.h src/comm/launch.h src/model/model.h \
 src/compute/backend.h src/base/checked.h src/compute/mempool.h \
 src/model/model_config.h src/model/params.h src/parallel/sched.h \
 src/parallel/zero.h
src/parallel/executor.h:
src/comm/comm.h:
src/base/common.h:
src/base/dtype.h:
src/comm/launch.h:
src/model/model.h:
src/compute/backend.h:
src/base/checked.h:
src/compute/mempool.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/sched.h:
src/parallel/zero.h:
