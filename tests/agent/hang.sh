#!/bin/sh
# Stands in for a wedged nvidia-smi in gpu_inventory_test: never answers.
exec sleep 30
