cluster local = cpu(devices: 2)
42 //~ E0117
