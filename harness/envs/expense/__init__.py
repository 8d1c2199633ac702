"""The simulated D365 F&O hotel-expense itemization benchmark (the *Less Context, Better Agents* setting).

Entry point for configs: `harness.envs.expense.domain.ExpenseDomain`."""
