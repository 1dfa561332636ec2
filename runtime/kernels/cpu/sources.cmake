# CPU kernel sources, split by the ISA flags they are compiled with (STYLE H11).
set(CG_CPU_KERNEL_SRCS)
set(CG_AVX2_SRCS)
set(CG_AVX512_SRCS)
