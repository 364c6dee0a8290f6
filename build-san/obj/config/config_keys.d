build-san/obj/config/config_keys.o: src/config/config_keys.c \
 src/config/config_keys_internal.h src/config/config.h src/base/common.h \
 src/base/dtype.h src/comm/comm.h src/comm/launch.h src/compute/backend.h \
 src/base/checked.h src/model/model.h src/compute/mempool.h \
 src/model/model_config.h src/model/params.h src/parallel/optim.h \
 src/parallel/zero.h src/parallel/sched.h
src/config/config_keys_internal.h:
src/config/config.h:
src/base/common.h:
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
