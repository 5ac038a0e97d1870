#!/usr/bin/env bash
# Create (once) the separate virtual environment that runs the real Petastorm 0.13.1.
# The script itself ships in pyddstore-torch (pyddstore/torch/petastorm/petastorm_venv.sh), so that an
# installed package can create it too (python -m pyddstore.torch.petastorm.env); this wrapper
# keeps the checkout's path. Usage and pins: see that script.
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/pyddstore-torch/pyddstore/torch/petastorm/petastorm_venv.sh" "$@"
