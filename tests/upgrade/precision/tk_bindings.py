"""tkinter: unbind(sequence, funcid) takes an event pattern, never a dimension."""  # none
import tkinter as tk  # none
import turtle  # none

root = tk.Tk()  # none
canvas = tk.Canvas(root)  # none
canvas.bind("<KeyPress>", print)  # none
canvas.unbind("<KeyPress>")  # none
canvas.unbind("<Button-1>", None)  # none
root.unbind_all("<Key>")  # none
screen = turtle.Screen()  # none
screen.mode("logo")  # low: UPG210
canvas.unbind("KeyPress")  # low: UPG210
