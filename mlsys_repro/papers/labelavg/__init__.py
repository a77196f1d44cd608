"""L-Attack (zeroth-order data reconstruction from the outputs a federated-distillation client uploads) and
LabelAvg (its defence: hard-label uploads with voting-based label smoothing), with FedMD, DS-FL, FedDF and FedAvg
as baselines. See README.md for what is the paper's and what is our reconstruction."""
