/* Keep the wheel's glibc floor (manylinux_2_17, .ci/run checks it) for the code that starts a thread
 * (pycudadrv/_waiter.pyx). glibc 2.34 moved libpthread into libc and gave pthread_create and its
 * neighbours new symbol versions; a build on a newer glibc binds to those and the wheel would need
 * 2.34. Bind to the versions every glibc since the floor has instead (glibc keeps them for
 * compatibility). Include it in the one translation unit that calls these functions. */
#ifndef PYCUDADRV_GLIBC_FLOOR_H
#define PYCUDADRV_GLIBC_FLOOR_H
#if defined(__linux__) && defined(__GLIBC__)
#if defined(__x86_64__)
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_setname_np,pthread_setname_np@GLIBC_2.12");
#elif defined(__aarch64__)
__asm__(".symver pthread_create,pthread_create@GLIBC_2.17");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.17");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.17");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.17");
__asm__(".symver pthread_setname_np,pthread_setname_np@GLIBC_2.17");
#endif
#endif
#endif
