namespace minidl { void register_shape_cpu_kernels() {} }
