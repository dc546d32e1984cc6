"""The project's shared contracts: the serving.toml schema and partition plan, the files passed
between parts (typed), the project layout, and the few helpers every part needs. Imports nothing
else of the project (an import-linter contract checks it).
"""
