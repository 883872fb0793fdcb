"""Code generation: the kernel IR and its CUDA / OpenCL printers."""
