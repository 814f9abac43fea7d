"""Imported only in the multiprocessing forkserver, as a preload module (see
index.lifeline): the forkserver exits when the process that started it does."""

import os

from index.lifeline import die_with

die_with(os.getppid())
