"""Floor 2: what the device and the machine can do and are doing: step timing at device
sync points, matmul peak, memory bandwidth, the roofline, op counts, the step breakdown, machine
state, environment, doctor. Imports only harness.config below it."""
