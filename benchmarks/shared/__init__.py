"""What several studies use: the toy-task settings and trainer fields (`settings`), the policy they start from
(`policy`), timers and counters (`instruments`), report output (`output`), the tasks with difficulty levels
(`tasks`), the probe inside the reward (`outcome_probe`) and the statistics over seeds (`stats`)."""
