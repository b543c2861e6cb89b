# a comment the Python way //~ E0112
cluster local = cpu(devices: 2)
