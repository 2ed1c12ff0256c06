"""The compiled trace scanner is optional: without a C compiler (or Python headers) the build
warns and the package installs with the pure-Python reader."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("difftest.trace._scan", ["difftest/trace/_scan.c"], optional=True)])
