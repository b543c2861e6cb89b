cluster local = cpu(devices: 2)
place policy.train on local[0..2] with ddp(2) //~ E0119
