let gpu = device(memory: 80GIB, flops: 989TFLOPS) //~ E0108
