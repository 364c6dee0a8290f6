build-san/obj/parallel/sched.o: src/parallel/sched.c src/parallel/sched.h \
 src/base/common.h
src/parallel/sched.h:
src/base/common.h:
