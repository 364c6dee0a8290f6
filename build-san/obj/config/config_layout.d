build-san/obj/config/config_layout.o: src/config/config_layout.c \
 src/config/config_layout.h src/comm/mesh.h src/base/common.h \
 src/comm/comm.h src/base/dtype.h src/comm/launch.h src/compute/mempool.h \
 src/compute/backend.h src/base/checked.h src/config/config.h \
 src/model/model.h src/model/model_config.h src/model/params.h \
 src/parallel/optim.h src/parallel/zero.h src/parallel/sched.h
src/config/config_layout.h:
src/comm/mesh.h:
src/base/common.h:
src/comm/comm.h:
src/base/dtype.h:
src/comm/launch.h:
src/compute/mempool.h:
src/compute/backend.h:
src/base/checked.h:
src/config/config.h:
src/model/model.h:
src/model/model_config.h:
src/model/params.h:
src/parallel/optim.h:
src/parallel/zero.h:
src/parallel/sched.h:
