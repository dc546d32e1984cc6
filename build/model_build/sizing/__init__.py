"""max_batch_size from measured memory (the 70% rule).
"""
