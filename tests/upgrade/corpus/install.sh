#!/bin/sh
# expect-next: UPG303
pip install torch==2.6.0 --index-url https://download.pytorch.org/whl/cu126
# expect-next: UPG304
conda install -y pytorch pytorch-cuda=12.4 -c pytorch -c nvidia
pip install torch --index-url https://download.pytorch.org/whl/cu130
