"""Green workload placement for the Energy Internet: multi-action deep RL for model partition and function
assignment (Zhou et al., JMPCE 2022), reconstructed; see README.md."""
