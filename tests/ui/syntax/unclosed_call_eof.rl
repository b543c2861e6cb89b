cluster local = cpu(devices: 2 //~ E0102
