build-san/obj/plan/plan_device.o: src/plan/plan_device.c src/plan/plan.h \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/compute/mempool.h src/compute/backend.h src/base/checked.h \
 src/config/config.h src/model/model.h src/model/model_config.h \
 src/model/params.h src/parallel/optim.h src/parallel/zero.h \
 src/parallel/sched.h
src/plan/plan.h:
src/comm/comm.h:
src/base/common.h:
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
