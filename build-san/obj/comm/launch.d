build-san/obj/comm/launch.o: src/comm/launch.c src/comm/launch.h \
 src/base/common.h /usr/lib/x86_64-linux-gnu/pmix2/include/pmix.h \
 /usr/lib/x86_64-linux-gnu/pmix2/include/pmix_common.h \
 /usr/lib/x86_64-linux-gnu/pmix2/include/pmix_version.h \
 /usr/lib/x86_64-linux-gnu/pmix2/include/pmix_deprecated.h src/base/env.h \
 src/base/stop.h
src/comm/launch.h:
src/base/common.h:
/usr/lib/x86_64-linux-gnu/pmix2/include/pmix.h:
/usr/lib/x86_64-linux-gnu/pmix2/include/pmix_common.h:
/usr/lib/x86_64-linux-gnu/pmix2/include/pmix_version.h:
/usr/lib/x86_64-linux-gnu/pmix2/include/pmix_deprecated.h:
src/base/env.h:
src/base/stop.h:
