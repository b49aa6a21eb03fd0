// Placeholder: being written (issue 6, CUDA backend).
