#!/usr/bin/env python
"""Train (or reload from runs/analysis/) the two FedLoGe backbones of the analysis chapters and write every figure and
number of nbs/10-14 to results/analysis/: `fedloge_nb.analysis_runs.main` (nbs/14a_analysis_runs.ipynb), e.g.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/train_analysis_runs.py --rounds 100 --frac 0.5 --local_epochs 1 \
        --batch_size 64 --lr 0.05 --seed 0 --cache runs/analysis --out results/analysis --hp gamma=1.0,ft_lr=null
"""
from fedloge_nb.analysis_runs import main

if __name__ == '__main__': main()
