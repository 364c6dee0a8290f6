build-san/obj/plan/plan_search.o: src/plan/plan_search.c src/io/metrics.h \
 src/comm/comm.h src/base/common.h src/base/dtype.h src/comm/launch.h \
 src/config/config.h src/compute/backend.h src/base/checked.h \
 src/model/model.h src/compute/mempool.h src/model/model_config.h \
 src/model/params.h src/parallel/optim.h src/parallel/zero.h \
 src/parallel/sched.h src/plan/plan.h
src/io/metrics.h:
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
src/plan/plan.h:
