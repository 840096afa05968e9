"""placeholder"""
def group_of(plan, ctx, role): return None
