"""The compiled parts are optional: without a C compiler (or Python headers) the build warns and
the package installs with their pure-Python counterparts (the trace reader, the CSV rows)."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("difftest.trace._scan", ["difftest/trace/_scan.c"], optional=True),
    Extension("difftest.report._csvrows", ["difftest/report/_csvrows.c"], optional=True),
])
