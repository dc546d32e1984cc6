"""The offline data sets: scikit-learn's digits and the text corpus from installed docs.
"""
